# Sources of the transfer engine (issue 4): target_sources(htp PRIVATE ...)
