"""Scripts copied into images and run there: standard library only, no envbuilder imports."""
