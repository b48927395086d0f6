"""Numerics: the float64 reference, the inputs, the error model and the reference layer sets.

Nothing here decides emitted IR, so none of it is in the generator digest.
"""
