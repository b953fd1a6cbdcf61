"""Running the notebooks locally, and the helpers the notebooks call for their widgets."""
