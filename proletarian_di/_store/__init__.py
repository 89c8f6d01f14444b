"""The database side: every statement (`dialects/`), the table names (`tables`),
connections and data sources, URLs, enqueueing, and the rows that record how jobs depend
on each other. It imports only the foundation (`errors`, `jobs`, `serializers`, `_common`,
...), never the engine, admin or contrib."""
