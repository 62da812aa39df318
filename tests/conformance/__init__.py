"""The conformance suite: jaxtune checked against work nobody on this project wrote."""
