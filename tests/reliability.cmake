# Reliability tests: fault injection, stress, fuzz regression replay (issue 7)
