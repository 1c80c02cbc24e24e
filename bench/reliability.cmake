# Reliability tools: the GPU integrity run (issue 7)
