# Tests of the node: several GPUs over one host tier (issue 13).
htp_add_test(test_node node_test.cpp)
htp_add_test(test_collectives collectives_test.cpp)
htp_add_test(test_swap_shard swap_shard_test.cpp)
