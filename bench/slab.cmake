# Benchmarks of the slab allocator
