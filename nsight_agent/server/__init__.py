"""The MCP front end: ``app`` builds and runs the server, ``tools_*`` hold the tools,
``boundary`` turns library results and errors into MCP answers."""
