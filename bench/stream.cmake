# The streaming benchmark (issue 6)
