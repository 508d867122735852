"""tempotrain: placeholder until the package lands."""
