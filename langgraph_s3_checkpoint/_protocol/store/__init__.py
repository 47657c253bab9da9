"""The long-term memory store's pure part: its layout, the bytes of its objects, the checks of its arguments and its
plans (the face, ``S3Store``/``AsyncS3Store``, is ``langgraph_s3_checkpoint.store``)."""
