package main

import (
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// putObject uploads with the SDK's multipart uploader.
func putObject(ctx context.Context, srv *miniotest.Server, bucket, key string, r io.Reader, _ int64) error {
	up := manager.NewUploader(srv.Client())
	_, err := up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: r})
	return err
}
