"""Where grades go: LMS exports, feedback pages, atomic writes, posting to Canvas."""
