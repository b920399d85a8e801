"""A fixture pack whose import fails: it must be reported, and everything else must keep working."""
import comfy.this_module_does_not_exist  # noqa: F401
