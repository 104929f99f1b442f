"""leased-outbox adapters: everything that touches the world."""
