"""A deployment on the Ray cluster: what it is made of, where its actors go, timing profiles, and the
launcher that starts and finds them."""
