# Tests of the slab allocator: htp_add_test(...)
htp_add_test(test_slab_allocator slab_allocator_test.cpp)
htp_add_test(test_slab_random slab_random_test.cpp)
htp_add_test(test_slab_threads slab_threads_test.cpp)
