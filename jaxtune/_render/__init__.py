"""What both flows' pages and tables are made with: one unit per column, and a
self-contained HTML page with matplotlib charts inlined as SVG. Imports only the core."""
