"""Rollout workers on Ray: the session (connect, start, stop) and the actors that collect for
one learner. Imports config and the errors below it."""
