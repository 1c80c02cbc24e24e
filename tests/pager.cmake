# Tests of the pager.
htp_add_test(test_pager pager_test.cpp)
htp_add_test(test_pager_schedule pager_schedule_test.cpp)
target_include_directories(test_pager_schedule PRIVATE ${PROJECT_SOURCE_DIR}/src)
htp_add_test(test_pager_lookahead pager_lookahead_test.cpp)
target_include_directories(test_pager_lookahead PRIVATE ${PROJECT_SOURCE_DIR}/src)
htp_add_test(test_pager_shadow pager_shadow_test.cpp)
# Activations: fresh acquires, release_last_use, a training-like loop.
htp_add_test(test_pager_activation pager_activation_test.cpp)
htp_add_test(test_pager_threads pager_threads_test.cpp)
htp_add_test(test_pager_scale pager_scale_test.cpp)
htp_add_test(test_pager_queue_limit pager_queue_limit_test.cpp)
htp_add_test(test_pager_metrics pager_metrics_test.cpp)
htp_add_test(test_pager_backends pager_backends_test.cpp)
htp_add_test(test_pager_resident pager_resident_test.cpp)
# GB-sized tensors: about 4.3 GB committed, so nothing else runs beside it.
htp_add_test(test_pager_model_size SERIAL pager_model_size_test.cpp)
htp_add_test(test_pager_file pager_file_test.cpp)
# Logging, reset_metrics, the Prometheus exposition, the trace ring.
htp_add_test(test_observability observability_test.cpp)
target_link_libraries(test_observability PRIVATE nlohmann_json::nlohmann_json)
# Compressed weights: the codec's pieces copied and decoded on page-in; synthetic weights from the
# benchmarks (bench/common/synthetic_weights.hpp).
htp_add_test(test_pager_compressed pager_compressed_test.cpp)
target_include_directories(test_pager_compressed PRIVATE ${PROJECT_SOURCE_DIR}/bench)
# Compressed companions of safetensors files (htp/companion.hpp), paged in through the pager.
htp_add_test(test_companion companion_test.cpp)
target_include_directories(test_companion PRIVATE ${PROJECT_SOURCE_DIR}/bench)
# Verified page-ins: a file or companion changed after registration fails that acquire with
# htp::corrupt_data and nothing else (synthetic weights from bench/common).
htp_add_test(test_pager_verify pager_verify_test.cpp)
target_include_directories(test_pager_verify PRIVATE ${PROJECT_SOURCE_DIR}/bench)
# The pager's components alone (src/pager/room_maker.hpp, prefetcher.hpp): their invariants.
htp_add_test(test_pager_components pager_room_maker_test.cpp pager_prefetcher_test.cpp)
target_include_directories(test_pager_components PRIVATE ${PROJECT_SOURCE_DIR}/src)
