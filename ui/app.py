"""Assay quality dashboard: `streamlit run ui/app.py` (or `make dashboard`).

A router over ``ui/app_pages/``: the shared sidebar (where the data lives, owner/tag filters,
reload) is drawn here before the chosen page runs. ASSAY_HOME is resolved once, at app start.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run ui/app.py` puts ui/ on sys.path, not the repo root that holds the packages.
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import streamlit as st  # noqa: E402

from ui import components, data  # noqa: E402

st.set_page_config(page_title="Assay quality", page_icon=":material/science:", layout="wide")

page = st.navigation([
    st.Page("app_pages/overview.py", title="Overview", icon=":material/grid_view:", default=True),
    st.Page("app_pages/domain.py", title="Domain", icon=":material/search:", url_path="domain"),
    st.Page("app_pages/training.py", title="Training", icon=":material/show_chart:", url_path="training"),
    st.Page("app_pages/regressions.py", title="Regressions", icon=":material/balance:", url_path="regressions"),
    st.Page("app_pages/variants.py", title="Variants", icon=":material/speed:", url_path="variants"),
    st.Page("app_pages/report_cards.py", title="Report cards", icon=":material/fact_check:",
            url_path="report-cards"),
])

home = data.current_home()  # ASSAY_HOME and ASSAY_DOMAINS_PATH are read here, once per session
data.current_domains_path()
components.sidebar(home)
page.run()
