# Tests of model presets and the planner (issue 6)
