"""The database layer: connections, migrations, and one small module per table."""
