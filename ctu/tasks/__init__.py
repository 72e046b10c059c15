"""Training tasks as data: checking a task set by replaying its gold actions (`check`)."""
