# Tests of the transfer engine: htp_add_test(...)
