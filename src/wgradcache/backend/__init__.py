"""The vendors' backend objects (``model/backends.py`` says what each answers)."""
