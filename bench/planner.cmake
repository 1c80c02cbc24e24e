# The capacity planner and model presets (issue 6)
