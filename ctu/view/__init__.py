"""`ctu view`: a run's or an evaluation's episodes, curves and tasks in one self-contained HTML page.

`ctu.view.data` reads the folders (a run directory's ``metrics.jsonl`` and ``trajectories/``, a `ctu eval` folder's
``eval.json`` and ``trajectories.jsonl``) into the page's data; `ctu.view.page` embeds it, with the page's own script
and style (``page.js``, ``page.css`` beside this file), in one HTML file that needs no network.
"""
