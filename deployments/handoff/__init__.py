"""What the web side hands a host worker for a deployment: `snapshot` (the typed plan a launch
decided, pure) and `sealed` (the launcher's Hub token, encrypted at rest). What comes back is in
`deployments.live`."""
