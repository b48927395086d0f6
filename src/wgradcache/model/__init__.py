"""The model: targets, kernel specs and labels, conv problems, and the rules they obey."""
