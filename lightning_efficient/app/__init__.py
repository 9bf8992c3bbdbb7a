"""The command-line application, ``lightning-efficient`` (``demo``, ``doctor``): built on the library's public API
only, and imported by nothing in the library."""
