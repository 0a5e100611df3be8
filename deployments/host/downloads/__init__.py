"""Model weights onto this host before its engine starts: Hub downloads with progress, cancel
and resume (`hub`, no Django), the launch's and the pre-fetch's bookkeeping (`fetching`), and
what this host's Hub cache holds (`inventory`), reported to the database."""
