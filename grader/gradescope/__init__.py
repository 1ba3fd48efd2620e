"""The Gradescope autograder: the bundle a course uploads, and what runs inside Gradescope."""
