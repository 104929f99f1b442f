"""leased-outbox core."""
