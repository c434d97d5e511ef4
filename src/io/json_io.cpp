// Placeholder removed below once implemented.
