"""The options of every ``dsdr-eval`` subcommand, declared once (``commands``) and read by both the
command line (``parser`` builds the argparse parsers) and the Python API (``schema.checked`` checks a
keyword value as the command line checks the typed string). docs/index.md says how to add an option.
"""
