"""The tuned configs on disk: the cache's layers and files (``cache``) and the layout of one
file (``layout``)."""
