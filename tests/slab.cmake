# Tests of the slab allocator: htp_add_test(...)
