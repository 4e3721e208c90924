"""The I/O layer: input discovery and reading, column roles, validation, atomic writers."""
