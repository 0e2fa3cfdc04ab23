"""Meta-World (MuJoCo) as LeRobot 0.4.4 evaluates it: its MT1 tasks, one camera, 4-D actions."""
