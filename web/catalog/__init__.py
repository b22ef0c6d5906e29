"""The catalog: its tables and migrations, the database, its SQL queries, what the pages
and the JSON API show of it, and the synthetic projects ``opmarket seed`` writes into it."""
