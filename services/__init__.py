"""What the windpipe services share: settings, logging, database engine, CLI."""
