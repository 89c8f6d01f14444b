"""MySQL and MariaDB: a pooled PyMySQL data source for workers and enqueuers, and the URL
helpers it uses; they live in `proletarian_di._store.mysql_pool`."""

from ._store.mysql_pool import DEFAULT_OPTIONS as DEFAULT_OPTIONS
from ._store.mysql_pool import MySQLDataSource as MySQLDataSource
from ._store.secrets import mask as mask
from ._store.secrets import parse_mysql_url as parse_mysql_url
