"""Scripts the safety tests run as separate processes, and the helpers they share with the tests."""
