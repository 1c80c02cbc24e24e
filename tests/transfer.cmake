# Tests of the transfer engine.
htp_add_test(test_token_bucket token_bucket_test.cpp)
htp_add_test(test_transfer transfer_engine_test.cpp)
htp_add_test(test_deadline_queue deadline_queue_test.cpp)
target_include_directories(test_deadline_queue PRIVATE ${PROJECT_SOURCE_DIR}/src)
htp_add_test(test_shared_link shared_link_test.cpp link_cell_test.cpp)
