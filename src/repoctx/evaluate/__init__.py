"""`repoctx eval`: localization quality on real issues (corpora, metrics, runner). This subpackage
depends on the product (``repoctx.Index``); nothing in the product imports it."""
