"""The course: configuration, late policy, validation, scaffolding and releases."""
