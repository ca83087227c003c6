"""Tools for plugin authors: ``aitune new-plugin`` and ``aitune plugins check``.

:mod:`.new_plugin` writes a plugin project that installs, is discovered and passes the
conformance suite before its author has written a line, so that every later change is
made to something known to work. :mod:`.plugin_check` runs that suite against the
backends of an installed plugin, the same check whoever installs it can repeat.

Nothing is imported here: the CLI imports the module a command needs when it runs.
"""
