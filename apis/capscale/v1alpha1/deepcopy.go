package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies the receiver into out.
func (in *ElasticWeb) DeepCopyInto(out *ElasticWeb) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy of the receiver.
func (in *ElasticWeb) DeepCopy() *ElasticWeb {
	if in == nil {
		return nil
	}
	out := new(ElasticWeb)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ElasticWeb) DeepCopyObject() runtime.Object {
	if c := in.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies the receiver into out.
func (in *ElasticWebSpec) DeepCopyInto(out *ElasticWebSpec) {
	*out = *in
	if in.MinReplicas != nil {
		v := *in.MinReplicas
		out.MinReplicas = &v
	}
	if in.MaxReplicas != nil {
		v := *in.MaxReplicas
		out.MaxReplicas = &v
	}
	if in.Resources != nil {
		out.Resources = in.Resources.DeepCopy()
	}
}

// DeepCopy returns a deep copy of the receiver.
func (in *ContainerResources) DeepCopy() *ContainerResources {
	if in == nil {
		return nil
	}
	return &ContainerResources{Requests: copyResourceList(in.Requests), Limits: copyResourceList(in.Limits)}
}

func copyResourceList(in corev1.ResourceList) corev1.ResourceList {
	if in == nil {
		return nil
	}
	out := make(corev1.ResourceList, len(in))
	for k, v := range in {
		out[k] = v.DeepCopy()
	}
	return out
}

// DeepCopyInto copies the receiver into out.
func (in *ElasticWebStatus) DeepCopyInto(out *ElasticWebStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopyInto copies the receiver into out.
func (in *ElasticWebList) DeepCopyInto(out *ElasticWebList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ElasticWeb, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *ElasticWebList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(ElasticWebList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopy returns a deep copy of the receiver.
func (in *ElasticWebStatus) DeepCopy() *ElasticWebStatus {
	if in == nil {
		return nil
	}
	out := new(ElasticWebStatus)
	in.DeepCopyInto(out)
	return out
}

// DeepCopy returns a deep copy of the receiver.
func (in *ElasticWebSpec) DeepCopy() *ElasticWebSpec {
	if in == nil {
		return nil
	}
	out := new(ElasticWebSpec)
	in.DeepCopyInto(out)
	return out
}
