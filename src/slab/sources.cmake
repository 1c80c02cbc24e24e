# Sources of the slab allocator (issue 3): target_sources(htp PRIVATE ...)
