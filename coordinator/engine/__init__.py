"""The round engine: the round state machine, selection, registry, deadlines, dispatch of tasks, restart replay."""
