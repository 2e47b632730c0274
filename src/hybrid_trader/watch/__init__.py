"""``hybrid-trader watch``: the executor's journal live in the browser (docs/LIVE.md, "Watching it").

``state.py`` what the page shows, read from the journal (read-only); ``app.py`` the Starlette app that serves the page
and pushes each new state as a server-sent event; ``page/`` the page (HTML, script, style; the charts are the
installed ``plotly`` package's Plotly.js, served locally).
"""
