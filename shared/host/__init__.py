"""Running queue-triggered handlers the way the Azure Functions host does, without the host."""
