"""The windpipe Arrow Flight data plane: chunk cache, materialization, tickets, server."""
