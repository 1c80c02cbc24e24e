# Benchmarks of the transfer engine
