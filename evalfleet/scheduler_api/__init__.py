"""The Scheduler service as a client sees it: `SchedulerClient`, its typed errors and limits."""
