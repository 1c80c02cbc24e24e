# Sim collectives with one rank per process (make_sim_rank_collectives): the test starts processes
# of rank_collectives_child, each one rank of a world in /dev/shm.
add_executable(rank_collectives_child rank_collectives_child.cpp)
target_link_libraries(rank_collectives_child PRIVATE htp::htp htp_logging)
htp_target_warnings(rank_collectives_child)
htp_add_test(test_rank_collectives rank_collectives_test.cpp)
target_compile_definitions(test_rank_collectives PRIVATE
  HTP_RANK_COLLECTIVES_CHILD="$<TARGET_FILE:rank_collectives_child>")
add_dependencies(test_rank_collectives rank_collectives_child)
