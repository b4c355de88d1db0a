"""Where a simulation's clients run: worker processes on this machine or Ray tasks, and what each worker does."""
