"""The catalog: its tables and migrations, the database, its SQL queries and what the pages
and the JSON API show of it."""
